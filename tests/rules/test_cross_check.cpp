// The cross-check's comparison (schemas/cross_check.hpp): normalisation of numbers, dates and text,
// absent values on either side, arrays, and the shipped invoice schema picking the normalisation.
#include <gtest/gtest.h>

#include <fstream>

#include "schemas/cross_check.hpp"
#include "schemas/schemas.hpp"

namespace {

using namespace quarry::schemas;
using ojson = nlohmann::ordered_json;

nlohmann::json invoice_schema() {
  std::ifstream in(schema_dir() / "invoice.schema.json");
  return nlohmann::json::parse(in);
}

const FieldComparison* find(const CrossCheckResult& r, const std::string& pointer) {
  for (const auto& f : r.fields)
    if (f.pointer == pointer) return &f;
  return nullptr;
}

std::string norm(const ojson& v, CompareAs as) {
  auto n = normalise_for_compare(v, as);
  return n ? *n : "<absent>";
}

TEST(CrossCheckNormalise, NumbersByValue) {
  EXPECT_EQ(norm(100, CompareAs::number), norm(100.0, CompareAs::number));
  EXPECT_EQ(norm(100, CompareAs::number), norm(1e2, CompareAs::number));
  EXPECT_EQ(norm(177.49, CompareAs::number), norm("177.490", CompareAs::number));
  EXPECT_EQ(norm(-3.5, CompareAs::number), norm(" -3.50 ", CompareAs::number));
  EXPECT_NE(norm(177.49, CompareAs::number), norm(177.48, CompareAs::number));
  EXPECT_NE(norm(0.1, CompareAs::number), norm(0.01, CompareAs::number));
  // A string that is not a number stays text (and still compares with itself).
  EXPECT_EQ(norm("n/a", CompareAs::number), norm("N/A", CompareAs::number));
}

TEST(CrossCheckNormalise, DatesIso) {
  EXPECT_EQ(norm("2024-03-15", CompareAs::date), "2024-03-15");
  EXPECT_EQ(norm("20240315", CompareAs::date), "2024-03-15");  // CII format 102
  EXPECT_EQ(norm("15.03.2024", CompareAs::date), "2024-03-15");
  EXPECT_EQ(norm("March 15, 2024", CompareAs::date), "2024-03-15");
  EXPECT_EQ(norm("2024. március 15.", CompareAs::date), "2024-03-15");
  EXPECT_NE(norm("2024-03-15", CompareAs::date), norm("2024-03-16", CompareAs::date));
  // Two readings (3 April or 4 March): not turned into a date.
  EXPECT_NE(norm("03/04/2024", CompareAs::date), "2024-04-03");
  EXPECT_NE(norm("03/04/2024", CompareAs::date), "2024-03-04");
}

TEST(CrossCheckNormalise, TextWithoutWhitespaceAndCase) {
  EXPECT_EQ(norm("HU42 1177 3016 1111 1018 0000 0000", CompareAs::text),
            norm("hu42117730161111101800000000", CompareAs::text));
  EXPECT_EQ(norm("  ACME   GmbH\n", CompareAs::text), norm("acme gmbh", CompareAs::text));
  EXPECT_EQ(norm("MÜLLER STRASSE", CompareAs::text), norm("Müller Straße", CompareAs::text));  // full case folding
  EXPECT_EQ(norm("Kft\u00A0Zrt", CompareAs::text), norm("kft zrt", CompareAs::text));         // no-break space
  EXPECT_NE(norm("INV-1", CompareAs::text), norm("INV-2", CompareAs::text));
  EXPECT_NE(norm("INV-1", CompareAs::text), norm("INV1", CompareAs::text));  // punctuation is kept
  EXPECT_EQ(norm(nullptr, CompareAs::text), "<absent>");
  EXPECT_EQ(norm(" \t ", CompareAs::text), "<absent>");
}

TEST(CrossCheck, InvoiceFieldsAgreeDisagreeAndAbsent) {
  const auto schema = invoice_schema();
  const ojson xml = ojson::parse(R"({
    "invoice_number": "INV-07133", "issue_date": "2020-09-05", "due_date": null, "currency": "GBP",
    "seller": {"name": "Kestrel Print Limited", "vat_id": "GB 676 100 840", "tax_id": null},
    "buyer": {"name": "Harbour Analytics Ltd"},
    "totals": {"net": 98.85, "vat": 19.77, "gross": 118.62},
    "payment": {"iban": "GB92 PTUO 2768 8989 4465 10"}})");
  const ojson model = ojson::parse(R"({
    "invoice_number": "inv-07133", "issue_date": "2020-09-05", "due_date": "2020-10-20", "currency": "GBP",
    "seller": {"name": "Kestrel  Print Limited", "vat_id": "GB676100840", "tax_id": null},
    "buyer": {"name": "Harbour Analytics"},
    "totals": {"net": 98.850, "vat": 19.77, "gross": 181.62},
    "payment": {"iban": "GB92PTUO27688989446510"}})");
  const auto r = cross_check(schema, model, xml);
  EXPECT_EQ(r.disagree, 2u);
  ASSERT_NE(find(r, "/totals/gross"), nullptr);
  EXPECT_EQ(find(r, "/totals/gross")->outcome, FieldOutcome::disagree);
  EXPECT_EQ(find(r, "/totals/gross")->model, 181.62);
  EXPECT_EQ(find(r, "/totals/gross")->xml, 118.62);
  EXPECT_EQ(find(r, "/buyer/name")->outcome, FieldOutcome::disagree);
  for (const char* agree : {"/invoice_number", "/issue_date", "/currency", "/seller/name", "/seller/vat_id",
                            "/totals/net", "/totals/vat", "/payment/iban"}) {
    ASSERT_NE(find(r, agree), nullptr) << agree;
    EXPECT_EQ(find(r, agree)->outcome, FieldOutcome::agree) << agree;
  }
  EXPECT_EQ(r.agree, 8u);
  // The XML has no due date: the model's is not checked.
  ASSERT_NE(find(r, "/due_date"), nullptr);
  EXPECT_EQ(find(r, "/due_date")->outcome, FieldOutcome::model_only);
  EXPECT_EQ(r.model_only, 1u);
  EXPECT_EQ(find(r, "/seller/tax_id"), nullptr);  // absent on both sides: not listed
  EXPECT_EQ(r.compared(), 10u);
}

TEST(CrossCheck, ZeroAmountsAndAbsentAgree) {
  const auto schema = invoice_schema();
  const ojson xml = ojson::parse(R"({"totals": {"allowance_total": 0.00, "charge_total": 0, "vat": 0, "net": 5}})");
  const ojson model = ojson::parse(R"({"totals": {"allowance_total": null, "charge_total": 0.0, "vat": 3, "amount_due": 0}})");
  const auto r = cross_check(schema, model, xml);
  EXPECT_EQ(find(r, "/totals/allowance_total")->outcome, FieldOutcome::agree);
  EXPECT_EQ(find(r, "/totals/charge_total")->outcome, FieldOutcome::agree);
  EXPECT_EQ(find(r, "/totals/vat")->outcome, FieldOutcome::disagree);  // 0 is not 3
  EXPECT_EQ(find(r, "/totals/net")->outcome, FieldOutcome::disagree);  // 5 is not absent
  EXPECT_EQ(find(r, "/totals/amount_due"), nullptr);                  // 0 where the XML says nothing
  EXPECT_EQ(r.model_only, 0u);
  // Text is not a number: "0" and nothing differ.
  const auto t = cross_check(schema, ojson::parse(R"({"invoice_number": null})"), ojson::parse(R"({"invoice_number": "0"})"));
  EXPECT_EQ(find(t, "/invoice_number")->outcome, FieldOutcome::disagree);
}

TEST(CrossCheck, MissingOnTheModelSideDisagrees) {
  const auto schema = invoice_schema();
  const ojson xml = ojson::parse(R"({"invoice_number": "7", "seller": {"name": "A", "vat_id": "DE1"}})");
  const ojson model = ojson::parse(R"({"invoice_number": null, "seller": null})");
  const auto r = cross_check(schema, model, xml);
  EXPECT_EQ(r.agree, 0u);
  EXPECT_EQ(r.disagree, 3u);
  ASSERT_NE(find(r, "/seller/vat_id"), nullptr);
  EXPECT_TRUE(find(r, "/seller/vat_id")->model.is_null());
  EXPECT_EQ(find(r, "/seller/vat_id")->xml, "DE1");
}

TEST(CrossCheck, ArraysCountAndElementsByIndex) {
  const auto schema = invoice_schema();
  const ojson xml = ojson::parse(R"({"line_items": [
    {"description": "Coffee", "net_amount": 31.12, "quantity": 2},
    {"description": "Paper", "net_amount": 37.86, "quantity": 6},
    {"description": "Translation", "net_amount": 29.87, "quantity": 1}]})");
  const ojson model = ojson::parse(R"({"line_items": [
    {"description": "coffee", "net_amount": 31.12, "quantity": "2"},
    {"description": "Paper", "net_amount": 37.68, "quantity": 6}]})");
  const auto r = cross_check(schema, model, xml);
  const auto* count = find(r, "/line_items");
  ASSERT_NE(count, nullptr);
  EXPECT_TRUE(count->count);
  EXPECT_EQ(count->outcome, FieldOutcome::disagree);
  EXPECT_EQ(count->model, 2);
  EXPECT_EQ(count->xml, 3);
  EXPECT_EQ(find(r, "/line_items/0/quantity")->outcome, FieldOutcome::agree);  // "2" read as the number 2
  EXPECT_EQ(find(r, "/line_items/1/net_amount")->outcome, FieldOutcome::disagree);
  EXPECT_EQ(find(r, "/line_items/1/net_amount")->field, "/line_items/*/net_amount");
  EXPECT_EQ(find(r, "/line_items/2/description"), nullptr);  // covered by the count
  EXPECT_EQ(r.disagree, 2u);
  EXPECT_EQ(r.agree, 5u);

  // The XML lists no lines (an empty array is absent): the model's are not checked.
  const auto r2 = cross_check(schema, model, ojson::parse(R"({"line_items": []})"));
  EXPECT_EQ(r2.compared(), 0u);
  EXPECT_EQ(r2.model_only, 6u);
}

TEST(CrossCheck, SchemaPicksTheNormalisation) {
  // A user's schema: "when" is a date, "amount" a number given as a string by one side, "code" text.
  const auto schema = nlohmann::json::parse(R"({"type": "object", "properties": {
    "when": {"type": "string", "format": "date"},
    "amount": {"$ref": "#/$defs/money"},
    "code": {"type": "string"}},
    "$defs": {"money": {"type": "number"}}})");
  const ojson xml = ojson::parse(R"({"when": "20240315", "amount": "12.50", "code": "0012"})");
  const ojson model = ojson::parse(R"({"when": "2024-03-15", "amount": 12.5, "code": "12"})");
  const auto r = cross_check(schema, model, xml);
  EXPECT_EQ(find(r, "/when")->outcome, FieldOutcome::agree);
  EXPECT_EQ(find(r, "/amount")->outcome, FieldOutcome::agree);
  EXPECT_EQ(find(r, "/code")->outcome, FieldOutcome::disagree);  // text: "0012" is not "12"
}

TEST(CrossCheck, HostileShapesNeverThrow) {
  const auto schema = invoice_schema();
  ojson deep = 1;
  for (int i = 0; i < 500; ++i) deep = ojson::array({deep});
  ojson odd = ojson::parse(R"({"seller": "a string where an object belongs", "line_items": {"x": 1},
                               "totals": [1, 2], "a/b~c": 1})");
  EXPECT_NO_THROW(cross_check(schema, deep, deep));
  EXPECT_NO_THROW(cross_check(schema, odd, deep));
  const auto r = cross_check(schema, odd, ojson::parse(R"({"seller": {"name": "X"}, "line_items": [{"net_amount": 1}],
                                                          "a/b~c": 2})"));
  EXPECT_EQ(find(r, "/seller")->outcome, FieldOutcome::disagree);
  EXPECT_EQ(find(r, "/line_items")->outcome, FieldOutcome::disagree);
  ASSERT_NE(find(r, "/a~1b~0c"), nullptr);  // pointer tokens escaped (RFC 6901)
  EXPECT_NO_THROW(cross_check(nlohmann::json::parse(R"({"$ref": "#"})"), odd, odd));
  EXPECT_NO_THROW(cross_check(nullptr, std::string("\xff\xfe"), std::string("\xff")));
}

}  // namespace
